// Prints the directory of every publishable workspace package (not private), one a line.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = dirname(dirname(fileURLToPath(import.meta.url)));
for (const group of ['packages', 'apps']) {
  for (const name of readdirSync(join(root, group)).sort()) {
    const manifest = join(root, group, name, 'package.json');
    if (existsSync(manifest) && !JSON.parse(readFileSync(manifest, 'utf8')).private)
      console.log(join(group, name));
  }
}
