// memvault console: the only script, loaded from the console itself (script-src 'self').
// A form submitted once disables its buttons, so a double click does not send it twice.
document.addEventListener("submit", function (event) {
  var buttons = event.target.querySelectorAll("button");
  window.setTimeout(function () {
    for (var i = 0; i < buttons.length; i++) buttons[i].disabled = true;
  }, 0);
});
