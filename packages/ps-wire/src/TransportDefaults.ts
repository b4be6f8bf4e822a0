/**
 * `creditFlushMs` of the RDMA transports the PS client and server make (mux's default is
 * 5 ms), one value for both sides.
 *
 * Why longer for the PS: its traffic is calls and replies, so what a side owes its peer
 * (receive credits, window space) rides that side's next message. The flush delay only
 * matters on a link that went quiet, where it sends an explicit credit update: a timer
 * wake-up on one side and the update's arrival wakes the other. At low load that was
 * most requests' fate — a shard with a request every 2–7 ms owes the credit of the last
 * request's buffer for longer than 5 ms — and a cold wake-up costs ≈ 100–150 µs of CPU on
 * a 2-vCPU VM, more than the request's own work. A sender never waits on these few credits
 * (mux sends an update at once at the return threshold or when the window is half used),
 * so the delay still bounds how long anything stays owed; it is not needed for progress.
 * Measured (`BENCH_EVAL_ONLY=fetch`, 3 runs each, alternately, load 3.7–5): shard wake-ups
 * per fetch at fetch@50%grpc 3.9–5.3 → 2.6–3.1, CPU per fetch RDMA ÷ TCP 0.96–1.02× →
 * 0.75–0.92×.
 */
export const PS_RDMA_CREDIT_FLUSH_MS = 100;
