// The browsable API's buttons: OPTIONS on the page's URL, and the POST form (multipart, with the API token).
(function () {
  var out = document.getElementById("response");
  function show(res, text) {
    var head = res.status + " " + res.statusText + "\nContent-Type: " + (res.headers.get("content-type") || "") + "\n\n";
    try { text = JSON.stringify(JSON.parse(text), null, 2); } catch (e) {}
    out.textContent = head + text;
  }
  document.getElementById("options-btn").addEventListener("click", async function (e) {
    var res = await fetch(e.target.dataset.url, { method: "OPTIONS", headers: { Accept: "application/json" } });
    show(res, await res.text());
  });
  var form = document.getElementById("post-form");
  if (form) form.addEventListener("submit", async function (e) {
    e.preventDefault();
    var data = new FormData(form);
    var token = data.get("token");
    data.delete("token");
    ["caption", "headline", "meta"].forEach(function (k) { if (!data.get(k)) data.delete(k); });
    var res = await fetch(form.dataset.url, { method: "POST", body: data, headers: { Authorization: "token " + token, Accept: "application/json" } });
    show(res, await res.text());
  });
})();
