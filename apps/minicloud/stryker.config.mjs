import { strykerConfig } from '../../config/stryker.base.mjs';

// Authentication: tokens, roles and the limiter.
export default strykerConfig({ mutate: ['src/auth/**/*.ts'] });
