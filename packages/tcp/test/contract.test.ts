import { describeTransportContract } from '@rdmajs/mux/contract';
import { tcpTarget } from './target.js';

describeTransportContract(tcpTarget);
