#!/usr/bin/env node
// The compiled bench (`pnpm build` first); its peers run compiled too (src/peers/peerLaunch.ts).
import '../dist/cli.js';
