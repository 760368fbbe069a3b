/// Bounded read-ahead between a connection's reader and the replication loop:
/// the reader takes a credit per frame and the loop returns it once the frame
/// is applied, so a slow store makes the socket (and the sender) wait instead
/// of frames piling up in memory.
actor ReadAheadGate {
    private var credits: Int
    private var waiters: [CheckedContinuation<Void, Never>] = []
    private var isOpen = true

    init(credits: Int) { self.credits = credits }

    func acquire() async {
        guard isOpen else { return }
        if credits > 0 {
            credits -= 1
            return
        }
        await withCheckedContinuation { waiters.append($0) }
    }

    func release() {
        if waiters.isEmpty { credits += 1 } else { waiters.removeFirst().resume() }
    }

    /// Lets every waiting and future reader through (the session is over).
    func open() {
        isOpen = false
        for waiter in waiters { waiter.resume() }
        waiters.removeAll()
    }
}
