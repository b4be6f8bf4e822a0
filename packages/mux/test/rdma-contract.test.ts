// The shared transport contract, run against RdmaTransport on the soft provider with a
// forked peer process (as @rdmajs/tcp runs it against TcpTransport).
import { describeTransportContract } from './contract/index.js';
import { rdmaTarget } from './rdmaTarget.js';

describeTransportContract(rdmaTarget);
