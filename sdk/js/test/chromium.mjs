// Debian's Chromium as the browser tests start it (sdk/js and sdk/reference-test): headless,
// no sandbox (CI runs as root), and nothing it would fetch on its own.
export const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];
