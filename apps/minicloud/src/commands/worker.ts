import { CommandError } from '../errors.js';
import type { Command } from './types.js';

export const worker: Command = {
  name: 'worker',
  summary: '(not implemented yet)',
  usage: ['Usage: minicloud worker'],
  options: {},
  run() {
    return Promise.reject(
      new CommandError('minicloud.not_implemented', 'worker is not implemented yet'),
    );
  },
};
