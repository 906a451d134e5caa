import { strykerConfig } from '../../config/stryker.base.mjs';

// Claims, fencing and the hot statements of the SQL backend, scoped runs:
// `pnpm mutate stryker.sql.config.mjs --mutate src/sql/claims.ts:78-99`. The tests need their
// databases (SQLite in memory, and PostgreSQL and MariaDB when they are running).
export default {
  ...strykerConfig({
    mutate: ['src/sql/claims.ts', 'src/sql/fence.ts', 'src/sql/finish.ts', 'src/sql/statements.ts'],
    tests: ['test/sql-claims.integration.test.ts'],
  }),
  incrementalFile: 'reports/stryker-incremental-sql.json',
  jsonReporter: { fileName: 'reports/mutation-sql.json' },
};
