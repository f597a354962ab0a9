// Origin admin page: small conveniences only; every page works without this.
// No HTML is ever written from script (Trusted Types allow no policy): text
// goes in through textContent.
"use strict";
(function () {
  var link = document.getElementById("raw-link");
  var slot = document.getElementById("raw-slot");
  if (link && slot && link.dataset.raw) {
    link.addEventListener("click", function (ev) {
      ev.preventDefault();
      link.setAttribute("aria-busy", "true");
      fetch(link.dataset.raw, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) { return r.json(); })
        .then(function (d) {
          var pre = document.createElement("pre");
          pre.className = "raw";
          if (d.ok && d.raw !== null) {
            pre.textContent = d.raw + (d.truncated ? "\n… (cut at 4,000 of " + d.chars + " characters)" : "");
          } else {
            pre.textContent = d.error || ("the raw line is withheld: " + (d.withheld || "not available"));
          }
          slot.replaceChildren(pre);
          link.hidden = true;
        })
        .catch(function () { window.location.href = link.href; });
    });
  }
  document.querySelectorAll("pre.copy").forEach(function (pre) {
    if (!navigator.clipboard) return;
    var b = document.createElement("button");
    b.type = "button";
    b.className = "ghost small copy-button";
    b.textContent = "Copy";
    b.addEventListener("click", function () {
      navigator.clipboard.writeText(pre.textContent).then(function () { b.textContent = "Copied"; });
    });
    pre.after(b);
  });
})();
