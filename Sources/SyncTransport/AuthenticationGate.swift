import NIOCore

/// Holds a connection's reads from the moment its decoder has the
/// handshake's frames (`EnvelopeDecoderHandler`) until the handshake
/// succeeded (`SocketActivity.didAuthenticate()`, then the `Authenticated`
/// event): a peer that has not proved the pairing secret cannot make us read
/// (and buffer) more than what one read brings, whatever frame it announces.
/// What the peer sent meanwhile waits in the socket. Sits right before the
/// decoder, and leaves the pipeline once authenticated.
final class AuthenticationGate: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// Sent through the pipeline once the handshake succeeded.
    struct Authenticated: Sendable {}

    private let activity: SocketActivity
    private var readPending = false

    init(activity: SocketActivity) {
        self.activity = activity
    }

    func read(context: ChannelHandlerContext) {
        if activity.holdsReads {
            readPending = true
        } else {
            context.read()
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard event is Authenticated else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        // The decoder may hold whole frames that came with the handshake's last one: it looks again.
        context.fireChannelRead(wrapInboundOut(context.channel.allocator.buffer(capacity: 0)))
        context.fireChannelReadComplete()  // what it decodes reaches the connection's reader
        if readPending {
            readPending = false
            context.read()
        }
        // Authenticated: nothing more to hold, so reads and writes no longer pass through it.
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }
}
