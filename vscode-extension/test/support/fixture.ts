// The MPI-style test program and its build: compiled by gcc at test time into a temporary
// directory, with line numbers found by markers in its source.

import { spawnSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { extensionDir } from './paths';

/** The fixture's source file in the repository. */
export const ringSource = path.join(extensionDir, 'test', 'fixtures', 'ring.c');

/** The line (1-based) of the source line that holds marker, which must occur exactly once. */
export function markerLine(file: string, marker: string): number {
  const lines = fs.readFileSync(file, 'utf8').split('\n');
  const hits = lines.flatMap((l, i) => (l.includes(marker) ? [i + 1] : []));
  if (hits.length !== 1) {
    throw new Error(`${file}: marker ${JSON.stringify(marker)} found ${hits.length} times`);
  }
  return hits[0];
}

/** The first and last line of a C function whose definition starts a line with "name(". */
export function functionLines(file: string, name: string): { first: number; last: number } {
  const lines = fs.readFileSync(file, 'utf8').split('\n');
  const first = lines.findIndex((l) => new RegExp(`^\\w[\\w\\s\\*]*\\b${name}\\(`).test(l));
  if (first < 0) {
    throw new Error(`${file}: no definition of ${name}`);
  }
  const last = lines.findIndex((l, i) => i > first && l === '}');
  return { first: first + 1, last: last + 1 };
}

/** Copies ring.c into dir and builds it with debug information; returns the executable. */
export function buildRing(dir: string): { source: string; program: string } {
  const source = path.join(dir, 'ring.c');
  fs.copyFileSync(ringSource, source);
  const program = path.join(dir, 'ring');
  const cc = spawnSync('gcc', ['-g', '-O0', '-o', program, source], { encoding: 'utf8' });
  if (cc.error || cc.status !== 0) {
    throw new Error(`gcc -g -O0 -o ${program} ${source}: ${cc.stderr || cc.error} (install build-essential)`);
  }
  return { source, program };
}
