import { CommandError } from '../errors.js';
import type { Command } from './types.js';

export const serve: Command = {
  name: 'serve',
  summary: '(not implemented yet)',
  usage: ['Usage: minicloud serve'],
  options: {},
  run() {
    return Promise.reject(
      new CommandError('minicloud.not_implemented', 'serve is not implemented yet'),
    );
  },
};
