import SyncTransport

extension MailboxReplicator {
    /// What a full spool of `limits` holds (its messages and the acknowledgement
    /// reserve): a round reads at most that many, so a peer that posts as fast
    /// as this end reads never keeps the round from posting.
    static func defaultMessagesPerRound(_ limits: MailboxLimits) -> Int {
        let (sum, overflow) = max(1, limits.maxMessages).addingReportingOverflow(max(0, limits.acknowledgementReserve))
        return overflow ? Int.max : sum
    }
}
