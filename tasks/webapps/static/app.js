// Shared helpers of the web apps: talk to the state server, build absolutely placed elements.
"use strict";
let pending = 0;
function busy(delta) {
  pending += delta;
  document.body.dataset.busy = String(pending);
}
async function api(action, body) {
  busy(1);
  try {
    const init = action === "data" ? {} : {
      method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body || {}),
    };
    const resp = await fetch("/api/" + action, init);
    const data = await resp.json();
    if (!resp.ok) throw new Error(data.error || resp.statusText);
    return data;
  } finally {
    busy(-1);
  }
}
// el("button", {label: "add:1", x: 10, y: 20, w: 80, h: 30, text: "Add", onclick: f})
function el(tag, o) {
  const e = document.createElement(tag);
  const style = e.style;
  if (o.x !== undefined) { style.left = o.x + "px"; style.top = o.y + "px"; }
  if (o.w !== undefined) style.width = o.w + "px";
  if (o.h !== undefined) style.height = o.h + "px";
  if (o.cls) e.className = o.cls;
  if (o.label) e.dataset.label = o.label;
  if (o.text !== undefined) e.textContent = o.text;
  if (o.value !== undefined) e.value = o.value;
  if (o.placeholder) e.placeholder = o.placeholder;
  if (o.disabled) e.disabled = true;
  if (o.onclick) e.addEventListener("click", o.onclick);
  if (o.oninput) e.addEventListener("input", o.oninput);
  if (o.parent !== null) (o.parent || document.body).appendChild(e);
  return e;
}
function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
function say(node, text, ok) { node.textContent = text; node.className = "msg " + (ok ? "ok" : "error"); }
async function start(render) {
  busy(0);
  try {
    render(await api("data"));
  } catch (e) {
    document.body.textContent = "Error: " + e.message;
  }
}
