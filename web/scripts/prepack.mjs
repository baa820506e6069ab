// `npm pack` from a fresh clone: the library is built from its sources, so its build tools must be
// there first. Installs them from the lock file (npm ci) when they are missing, then builds lib/.
import { execSync } from 'node:child_process';
import { existsSync } from 'node:fs';

const run = (command) => execSync(command, { stdio: 'inherit' });
if (!existsSync(new URL('../node_modules/.bin/tsc', import.meta.url))) {
  console.error('prepack: installing the build dependencies (npm ci)');
  run('npm ci --ignore-scripts --no-audit --no-fund');
}
run('npm run build:lib');
