//! The portal's one style sheet and one script, served from this server
//! (no CDN: it works on an air-gapped network; the CSP allows nothing
//! else). The script only refreshes what is live and shows a submission's
//! cost as it is typed; every page works without it.

pub const CSS: &str = r#"*{box-sizing:border-box}
body{font-family:system-ui,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
header{background:#23395d;color:#fff;padding:.5em 1em;display:flex;flex-wrap:wrap;align-items:center;gap:.25em 1em}
header a{color:#fff;text-decoration:none;padding:.25em .4em;border-radius:4px}
header a.here{background:#3d5a87}
header .who{margin-left:auto;font-size:.9em}
header form{display:inline;margin:0}
main{padding:1em;max-width:1200px}
h1{font-size:1.3em;margin:.2em 0 .6em}
h2{font-size:1.1em;margin-top:1.6em}
.scroll{overflow-x:auto}
table{border-collapse:collapse;font-size:.9em;min-width:100%}
td,th{border-bottom:1px solid #ddd;padding:.3em .5em;text-align:left;vertical-align:top}
th{background:#eef1f5}
td.num,th.num{text-align:right}
td form{display:inline;margin:0}
button,input[type=submit]{font:inherit;padding:.25em .7em;border:1px solid #23395d;background:#fff;color:#23395d;border-radius:4px;cursor:pointer}
button.danger{border-color:#a12;color:#a12}
label{display:block;margin:.5em 0 .15em;font-weight:600}
input[type=text],input[type=number],input[type=password],select,textarea{font:inherit;width:100%;max-width:40em;padding:.3em;border:1px solid #bbb;border-radius:4px}
textarea{font-family:ui-monospace,monospace;min-height:10em}
pre.output{background:#111;color:#eee;padding:.75em;overflow-x:auto;max-height:30em;white-space:pre-wrap}
.note{color:#555;font-size:.9em}
.error{color:#a12;font-weight:600}
.ok{color:#176b2c;font-weight:600}
.nodes{display:flex;flex-wrap:wrap;gap:1em}
.node{border:1px solid #ccc;border-radius:6px;padding:.5em;background:#fff;min-width:16em}
.node h2.node-name{margin:0 0 .3em}
.gpus{display:grid;grid-template-columns:repeat(auto-fill,minmax(7em,1fr));gap:.4em}
.gpu{border-radius:4px;padding:.3em;font-size:.8em;background:#e8f3e8;border:1px solid #9c9}
.gpu.allocated,.gpu.shared,.gpu.claimed{background:#fdecc8;border-color:#d9a441}
.gpu.draining,.gpu.drained{background:#eee;border-color:#999}
.bar{height:.4em;background:#ccc;border-radius:2px}.bar span{display:block;height:100%;background:#23395d;border-radius:2px}
.w0{width:0}.w10{width:10%}.w20{width:20%}.w30{width:30%}.w40{width:40%}.w50{width:50%}.w60{width:60%}.w70{width:70%}.w80{width:80%}.w90{width:90%}.w100{width:100%}
#preview{margin:1em 0;padding:.5em;border-left:4px solid #23395d;background:#fff}
@media (max-width:600px){main{padding:.5em}td,th{padding:.25em}header .who{margin-left:0}}
"#;

pub const JS: &str = r#"'use strict';
// Parts marked data-refresh="URL" are fetched again every 5 seconds.
document.querySelectorAll('[data-refresh]').forEach(function (el) {
  var url = el.getAttribute('data-refresh');
  setInterval(function () {
    fetch(url, {credentials: 'same-origin', headers: {'X-Fragment': '1'}})
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) { if (html !== null) { el.innerHTML = html; } })
      .catch(function () {});
  }, 5000);
});
// The submit form: what the job would cost, and whether it needs approval,
// as it is filled in.
var form = document.getElementById('submit-form');
var preview = document.getElementById('preview');
if (form && preview) {
  var timer;
  var ask = function () {
    fetch('/submit/preview', {
      method: 'POST', credentials: 'same-origin',
      headers: {'X-Fragment': '1', 'Content-Type': 'application/x-www-form-urlencoded'},
      body: new URLSearchParams(new FormData(form))
    }).then(function (r) { return r.text(); })
      .then(function (html) { preview.innerHTML = html; })
      .catch(function () {});
  };
  form.addEventListener('input', function () { clearTimeout(timer); timer = setTimeout(ask, 400); });
}
"#;
