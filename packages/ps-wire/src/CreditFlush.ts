/**
 * `creditFlushMs` of the transports the PS client and server make — RDMA and TCP alike, one
 * value for both sides (mux's and tcp's default is 5 ms).
 *
 * Why longer for the PS: its traffic is calls and replies. On RDMA what a side owes its peer
 * (receive credits, window space) rides that side's next message; TCP sends credit in
 * frames of its own, which the delay batches. The flush delay only
 * matters on a link that went quiet, where it sends an explicit credit update: a timer
 * wake-up on one side, and the update's arrival wakes the other. At low load that was
 * most requests' fate — a shard with a request every 2–7 ms owes the credit of the last
 * request's buffer for longer than 5 ms — and a cold wake-up costs ≈ 100–150 µs of CPU on
 * a 2-vCPU VM, more than the request's own work. A sender does not wait on these few
 * credits: both transports send an update at once at their thresholds, and when the peer's
 * view of the window passes half (TCP checks on each release and each arrival), so the delay
 * only bounds how long anything stays owed; it is not needed for progress. Measured at 450 fetches/s (3 shards, before/after alternately, 3 runs each,
 * load 1.6–1.9): shard wake-ups per request 1.14–1.26 → 0.80–0.84 (RDMA) and 1.02–1.18 →
 * 0.74–0.76 (TCP); CPU per fetch, client and shards, 754–972 → 671–776 µs (RDMA) and
 * 565–957 → 565–656 µs (TCP). TCP, the baseline, gets it too: given to RDMA alone it read
 * as CPU per fetch RDMA ÷ TCP 1.00–1.16× → 0.74–0.89×.
 */
export const PS_CREDIT_FLUSH_MS = 100;
