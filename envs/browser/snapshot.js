// The page as a tree of nodes for the text observation, with a stable `bid` on every element.
// Called as page.evaluate(SNAPSHOT_JS, {maxNodes}) and returns {nodes, truncated}: nodes in document
// order, each {bid, role, name, value, states, depth, interactive, visible, text, options}.
// A bid, once given to an element, stays with it for the life of the page (the counter lives on window).
(args) => {
  const maxNodes = args.maxNodes;
  const SKIP = new Set(["SCRIPT", "STYLE", "NOSCRIPT", "TEMPLATE", "HEAD", "META", "LINK", "BR"]);
  const INPUT_ROLES = {checkbox: "checkbox", radio: "radio", button: "button", submit: "button", reset: "button",
    image: "button", search: "searchbox", number: "spinbutton", range: "slider", email: "textbox",
    text: "textbox", password: "textbox", tel: "textbox", url: "textbox", date: "textbox", time: "textbox",
    "datetime-local": "textbox", month: "textbox", week: "textbox", color: "textbox", file: "button"};
  const TAG_ROLES = {A: "link", BUTTON: "button", SELECT: "combobox", TEXTAREA: "textbox", OPTION: "option",
    H1: "heading", H2: "heading", H3: "heading", H4: "heading", H5: "heading", H6: "heading", IMG: "img",
    UL: "list", OL: "list", LI: "listitem", TABLE: "table", TR: "row", TD: "cell", TH: "columnheader",
    NAV: "navigation", MAIN: "main", FORM: "form", LABEL: "LabelText", P: "paragraph", DIALOG: "dialog",
    HEADER: "banner", FOOTER: "contentinfo", ASIDE: "complementary", SECTION: "region", FIELDSET: "group",
    LEGEND: "legend", SVG: "graphics", svg: "graphics", CANVAS: "canvas", PROGRESS: "progressbar"};
  const INTERACTIVE_ROLES = new Set(["button", "link", "checkbox", "radio", "textbox", "searchbox", "combobox",
    "listbox", "option", "spinbutton", "slider", "tab", "menuitem", "switch", "treeitem", "gridcell"]);
  if (window.__agentgymNextBid === undefined) window.__agentgymNextBid = 1;
  const clean = (s) => (s || "").replace(/\s+/g, " ").trim();
  const roleOf = (el) => {
    const explicit = el.getAttribute("role");
    if (explicit) return explicit.split(" ")[0];
    if (el.tagName === "INPUT") return INPUT_ROLES[(el.type || "text").toLowerCase()] || "textbox";
    if (el.tagName === "A") return el.hasAttribute("href") ? "link" : "generic";
    if (el.tagName === "SELECT" && el.multiple) return "listbox";
    return TAG_ROLES[el.tagName] || "generic";
  };
  const labelOf = (el) => {
    const by = el.getAttribute("aria-labelledby");
    if (by) return clean(by.split(/\s+/).map((id) => (document.getElementById(id) || {}).textContent).join(" "));
    const aria = el.getAttribute("aria-label");
    if (aria) return clean(aria);
    if (el.labels && el.labels.length) return clean(Array.from(el.labels).map((l) => l.textContent).join(" "));
    return "";
  };
  const ownText = (el) => clean(Array.from(el.childNodes).filter((n) => n.nodeType === 3)
    .map((n) => n.textContent).join(" "));
  const nameOf = (el, role) => {
    const label = labelOf(el);
    if (label) return label;
    if (el.tagName === "INPUT" && ["button", "submit", "reset"].includes(el.type)) return clean(el.value || el.type);
    if (el.tagName === "IMG") return clean(el.alt);
    if (["INPUT", "TEXTAREA", "SELECT"].includes(el.tagName)) return clean(el.placeholder || el.title || el.name);
    if (["button", "link", "heading", "option", "tab", "menuitem", "columnheader", "LabelText",
         "legend", "gridcell", "treeitem", "switch", "checkbox", "radio"].includes(role))
      return clean(el.textContent).slice(0, 200);
    return clean(el.title);
  };
  const visible = (el) => {
    if (!el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})) return false;
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0;
  };
  const statesOf = (el, role) => {
    const s = [];
    if (el === document.activeElement && el !== document.body) s.push("focused");
    if (el.disabled || el.getAttribute("aria-disabled") === "true") s.push("disabled");
    if (el.required) s.push("required");
    if (el.readOnly) s.push("readonly");
    if ((el.type === "checkbox" || el.type === "radio") ? el.checked : el.getAttribute("aria-checked") === "true")
      s.push("checked");
    if (el.tagName === "OPTION" ? el.selected : el.getAttribute("aria-selected") === "true") s.push("selected");
    const expanded = el.getAttribute("aria-expanded");
    if (expanded) s.push(expanded === "true" ? "expanded" : "collapsed");
    if (el.getAttribute("aria-invalid") === "true") s.push("invalid");
    if (role === "heading") s.push("level=" + (el.getAttribute("aria-level") || el.tagName.slice(1)));
    return s;
  };
  const valueOf = (el) => {
    if (el.tagName === "SELECT") return clean(Array.from(el.selectedOptions).map((o) => o.textContent).join(", "));
    if (el.tagName === "TEXTAREA") return el.value;
    if (el.tagName === "INPUT" && !["checkbox", "radio", "button", "submit", "reset", "image"].includes(el.type))
      return el.type === "password" ? "•".repeat(el.value.length) : el.value;
    if (el.isContentEditable) return clean(el.textContent);
    return null;
  };
  const nodes = [];
  let truncated = false;
  const walk = (el, depth, parentVisible) => {
    if (nodes.length >= maxNodes) { truncated = true; return; }
    if (SKIP.has(el.tagName)) return;
    if (!el.hasAttribute("bid")) el.setAttribute("bid", String(window.__agentgymNextBid++));
    const role = roleOf(el);
    const isVisible = parentVisible && visible(el);
    const interactive = INTERACTIVE_ROLES.has(role) || el.hasAttribute("onclick") || el.isContentEditable ||
      (el.tabIndex >= 0 && el.hasAttribute("tabindex"));
    nodes.push({bid: el.getAttribute("bid"), role, name: nameOf(el, role), value: valueOf(el),
      states: statesOf(el, role), depth, interactive, visible: isVisible, text: ownText(el).slice(0, 500)});
    if (el.tagName === "SELECT" || el.tagName === "TEXTAREA") {
      if (el.tagName === "SELECT") Array.from(el.options).forEach((o) => {
        if (!o.hasAttribute("bid")) o.setAttribute("bid", String(window.__agentgymNextBid++));
        nodes.push({bid: o.getAttribute("bid"), role: "option", name: clean(o.textContent), value: null,
          states: o.selected ? ["selected"] : [], depth: depth + 1, interactive: false, visible: isVisible, text: ""});
      });
      return;
    }
    for (const child of el.children) walk(child, depth + 1, isVisible);
    if (el.shadowRoot) for (const child of el.shadowRoot.children) walk(child, depth + 1, isVisible);
  };
  if (document.body) walk(document.body, 0, true);
  return {nodes, truncated};
}
