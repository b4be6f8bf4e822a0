export { type AdoptOptions, adoptAccepted } from './adoptAccepted.js';
export type { OnRead } from './OnRead.js';
