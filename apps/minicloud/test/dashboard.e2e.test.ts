// The dashboard's tests live in dashboard/test (owned with the dashboard); this file runs them
// under this package's `test/**/*.test.ts` include. If vitest.config.ts gains
// 'dashboard/test/**/*.test.ts', delete this file so they do not run twice.
import '../dashboard/test/state.test.js';
import '../dashboard/test/serve.test.js';
import '../dashboard/test/dashboard.e2e.test.js';
