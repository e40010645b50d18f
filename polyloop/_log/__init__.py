"""The log format as a contract: records, their codec, derived ids, who decided, the errors, and
the two ports (the store, the model). Every other layer stands on this one; it imports none of them."""
