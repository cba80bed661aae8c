"""Browser-v0: web tasks in headless Chromium through Playwright (local task sites and MiniWoB++).

Modules: `driver` (the Playwright thread and browser pool), `session` (one
episode's isolated context), `snapshot.js` + `observation` (the page as a
text tree with bids), `actions` (text and tool-call actions), `sites/` (the
shop, forms and mail sites with their tasks), `miniwob` (the MiniWoB++
adapter), `env` (the gymnasium env).
"""
