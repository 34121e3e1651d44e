// `react-dom/client` as an ES module with named exports. The reference client does
// `const { createRoot } = await import("react-dom/client")`; esbuild's dynamic import of the
// CommonJS file gives only `default`, so the bundle resolves the name to this file.
import client from "../node_modules/react-dom/client.js";

export const { createRoot, hydrateRoot } = client;
export default client;
