#!/usr/bin/env node
// Empties a package's dist before its build: tsc never deletes what it no longer emits, so a module
// renamed or removed in src would otherwise stay in dist and be packed and published.
import { rmSync } from 'node:fs';

rmSync('dist', { recursive: true, force: true });
