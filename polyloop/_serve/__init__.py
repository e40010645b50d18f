"""`polyloop serve`: a browser console over the same library functions the command line uses.

Imported only with the `serve` extra installed (starlette, jinja2, uvicorn);
the core never imports it. `access` holds who may look and who may decide,
`app` the routes and the security headers, `pages` what is shown, `acts`
the decisions (each one library call, bound to what the person saw),
`live` the server-sent events, `server` the process. See
docs/how-to/decide-from-the-browser.md and docs/reference/serve.md.
"""
