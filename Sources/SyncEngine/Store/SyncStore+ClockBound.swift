import Logging

extension SyncStore {
    /// What the store's clock calls when it stops following a time it issued
    /// past `StoreOptions.maxRemoteClockAhead` of the wall clock (the device's
    /// clock ran ahead and was set right): a warning, since the writes made
    /// meanwhile were refused by the peer and keep those versions here.
    static func clockDropped(_ logger: Logger) -> @Sendable (_ packed: Int64, _ wallMilliseconds: Int64) -> Void {
        { packed, wall in
            let ahead = (packed >> 16).subtractingReportingOverflow(wall).partialValue
            logger.warning("the wall clock is far behind the versions this device issued (it ran ahead and was set right); versions follow the wall clock again",
                           metadata: ["aheadMilliseconds": "\(ahead)", "dropped": "\(HLCTimestamp(packed: packed, node: 0))"])
        }
    }
}
