export { TcpChannel } from './TcpChannel.js';
export { TcpConnection, type TcpConnectionSettings } from './TcpConnection.js';
export { TcpListener, TcpTransport, type TcpTransportOptions } from './TcpTransport.js';
