// The polyloop console's only script: served from the console itself (the page's
// Content-Security-Policy allows no other, and no inline script).
// It listens to the page's server-sent events: when what the page shows has
// moved, it redraws the page, unless a form is being filled in (then it says so
// instead: a decision on something that changed is refused by the server anyway)
// or the page is being left.
"use strict";
(function () {
  var body = document.body;
  var url = body.getAttribute("data-events");
  var typing = false;
  var leaving = false;  // a page being left never reloads itself over the navigation under way
  document.addEventListener("input", function () { typing = true; });
  if (url && window.EventSource) {
    var source = new EventSource(url);
    window.addEventListener("beforeunload", function () { leaving = true; source.close(); });
    source.addEventListener("moved", function () {
      source.close();
      if (leaving) {
        return;
      } else if (typing) {
        document.getElementById("moved").hidden = false;
      } else {
        window.location.reload();
      }
    });
  }
  // Submitting disables the form's buttons: one click, one decision.
  document.addEventListener("submit", function (event) {
    var buttons = event.target.querySelectorAll("button");
    for (var i = 0; i < buttons.length; i++) { buttons[i].disabled = true; }
  });
})();
