import { strykerConfig } from '../../config/stryker.base.mjs';

// Fencing tokens and the cross-process file locks.
export default strykerConfig({ mutate: ['src/common.ts', 'src/file.ts', 'src/file-*.ts'] });
