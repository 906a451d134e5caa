/** The SQL dialects `@rigging/sql` opens (`mysql` covers MariaDB too). */
export type Dialect = 'sqlite' | 'postgres' | 'mysql';
