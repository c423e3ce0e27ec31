/// `[events]`: where the daemon's event stream (`uploadq events`) is served, to whom, and how far a reader may fall
/// behind.
public struct EventSettings: Sendable, Equatable {
    /// `socket`: the Unix socket's path; nil: `state_dir/events.sock`.
    public var socket: String?
    /// `group`: the socket is made 0660 for this group (its members may follow the queue); nil: 0600, the
    /// daemon's user alone. The folder holding it must let the group through (the state directory does not).
    public var group: String?
    /// `reader_buffer`: the bytes a reader may let pile up before it is dropped.
    public var readerBuffer: Int64 = 256 << 10

    /// The defaults: `state_dir/events.sock`, 0600, 256 KiB per reader.
    public init() {}
}
