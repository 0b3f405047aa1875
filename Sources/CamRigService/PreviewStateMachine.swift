/// The decisions of `PreviewHub`, without I/O: who watches which camera, whether its preview stream is
/// to open, open or closed, whether previews are paused, and who waits for what. Each mutating method
/// returns what the hub must do (yield a preview to watchers, stop a stream on its agent, resume a
/// waiter), and the hub does it outside its lock, as swift-nio's `NIOThrowingAsyncSequenceProducer`
/// does with its state machine.
///
/// A camera's feed goes: waiting (to open, while previews are paused) → opening (StartStream sent) →
/// open (the agent's stream id known) → closed (ended, or stopped for a pause) → waiting again. It
/// lives from its first watcher to its last; a feed that ends is a new `generation` when it starts again,
/// so a late report of the old one is ignored.
struct PreviewStateMachine<Watcher: Sendable, Client: Sendable, Waiter: Sendable, Preview: Sendable> {
    enum Stream {
        /// Not open: between tries, or stopped for a pause.
        case closed
        /// Its loop waits for previews to be resumed.
        case waiting(Waiter)
        /// StartStream sent, not answered yet.
        case opening
        case open(client: Client, streamID: String)
    }

    struct Feed {
        var generation: UInt64
        var watchers: [UInt64: Watcher] = [:]
        var latest: Preview?
        var latestAt: ContinuousClock.Instant?
        /// When its watchers were last given a preview (the newest again, by the keep-alive).
        var deliveredAt: ContinuousClock.Instant?
        var received: UInt64 = 0
        var error: String?
        var stream: Stream = .closed
        var task: Task<Void, Never>?
    }

    private(set) var feeds: [String: Feed] = [:]
    private var nextID: UInt64 = 1
    private var pauses = 0
    /// `pause()` callers waiting for every stream to close.
    private var quietWaiters: [UInt64: Waiter] = [:]
    /// The keep-alive waiting for a feed with a preview.
    private var keepAliveWaiter: Waiter?
    private(set) var stopped = false

    var isPaused: Bool { pauses > 0 }

    /// Every stream is closed or waiting.
    var isQuiet: Bool {
        feeds.values.allSatisfy { feed in
            switch feed.stream {
            case .closed, .waiting: true
            case .opening, .open: false
            }
        }
    }

    mutating func makeID() -> UInt64 {
        defer { nextID += 1 }
        return nextID
    }

    // MARK: Watchers

    enum WatchAction {
        /// The first watcher: start the feed's loop with this generation.
        case startFeed(generation: UInt64)
        /// Give the newest preview to the new watcher at once.
        case yield(Preview)
        case none
    }

    mutating func watch(_ name: String, watcher: Watcher) -> (id: UInt64, action: WatchAction) {
        let id = makeID()
        if var feed = feeds[name] {
            feed.watchers[id] = watcher
            feeds[name] = feed
            return (id, feed.latest.map(WatchAction.yield) ?? .none)
        }
        let generation = makeID()
        var feed = Feed(generation: generation)
        feed.watchers[id] = watcher
        feeds[name] = feed
        return (id, .startFeed(generation: generation))
    }

    /// The feed's loop started as `task`; nil when it should not run (the feed is already gone).
    mutating func feedStarted(_ name: String, generation: UInt64, task: Task<Void, Never>) -> Task<Void, Never>? {
        guard feeds[name]?.generation == generation else { return task }
        feeds[name]?.task = task
        return nil
    }

    struct StopWatchingAction {
        var finish: Watcher?
        /// The feed's last watcher left: its loop ends, and its open stream is stopped on the agent.
        var cancel: Task<Void, Never>?
        var stopStream: (client: Client, streamID: String)?
        var resume: [Waiter] = []
        var resumeLoop: Waiter?
    }

    mutating func stopWatching(_ name: String, id: UInt64) -> StopWatchingAction {
        guard var feed = feeds[name], let watcher = feed.watchers.removeValue(forKey: id) else { return StopWatchingAction() }
        guard feed.watchers.isEmpty else {
            feeds[name] = feed
            return StopWatchingAction(finish: watcher)
        }
        feeds.removeValue(forKey: name)
        var action = StopWatchingAction(finish: watcher, cancel: feed.task)
        switch feed.stream {
        case .open(let client, let streamID): action.stopStream = (client, streamID)
        case .waiting(let loop): action.resumeLoop = loop
        case .closed, .opening: break
        }
        if isQuiet { action.resume = takeQuietWaiters() }
        return action
    }

    func watcherCount(_ name: String) -> Int { feeds[name]?.watchers.count ?? 0 }
    func receivedCount(_ name: String) -> UInt64 { feeds[name]?.received ?? 0 }
    func error(_ name: String) -> String? { feeds[name]?.error }

    // MARK: The feed's stream

    enum OpenAction {
        /// Open the stream now (it is marked opening).
        case open
        /// Previews are paused: `park` the loop until they resume.
        case wait
        /// The feed is gone: its loop ends.
        case end
    }

    /// The feed's loop is about to open its stream.
    mutating func openStream(_ name: String, generation: UInt64) -> OpenAction {
        guard !stopped, var feed = feeds[name], feed.generation == generation else { return .end }
        guard pauses == 0 else { return .wait }
        feed.stream = .opening
        feeds[name] = feed
        return .open
    }

    /// The loop waits for previews to resume; false (not kept: resume it at once and ask again) when
    /// they already have, or the feed is gone.
    mutating func park(_ name: String, generation: UInt64, waiter: Waiter) -> Bool {
        guard !stopped, pauses > 0, var feed = feeds[name], feed.generation == generation else { return false }
        feed.stream = .waiting(waiter)
        feeds[name] = feed
        return true
    }

    /// The loop's wait ended by cancellation: its waiter, if still held.
    mutating func cancelWait(_ name: String, generation: UInt64) -> Waiter? {
        guard var feed = feeds[name], feed.generation == generation, case .waiting(let waiter) = feed.stream else { return nil }
        feed.stream = .closed
        feeds[name] = feed
        return waiter
    }

    /// The agent started the stream; when previews were paused meanwhile, it is to be stopped at once.
    mutating func streamStarted(_ name: String, generation: UInt64, client: Client, streamID: String) -> (client: Client, streamID: String)? {
        guard var feed = feeds[name], feed.generation == generation else { return (client, streamID) }
        feed.error = nil
        feed.stream = .open(client: client, streamID: streamID)
        feeds[name] = feed
        return pauses > 0 ? (client, streamID) : nil
    }

    struct PreviewAction {
        var watchers: [Watcher] = []
        var keepAlive: Waiter?
    }

    /// A preview came: every watcher gets it.
    mutating func received(_ name: String, generation: UInt64, _ preview: Preview, at now: ContinuousClock.Instant) -> PreviewAction {
        guard var feed = feeds[name], feed.generation == generation else { return PreviewAction() }
        feed.latest = preview
        feed.latestAt = now
        feed.deliveredAt = now
        feed.received += 1
        feeds[name] = feed
        let keepAlive = keepAliveWaiter
        keepAliveWaiter = nil
        return PreviewAction(watchers: Array(feed.watchers.values), keepAlive: keepAlive)
    }

    /// The stream ended (the agent said why, or the connection failed): `pause()` callers waiting for
    /// quiet are resumed when it was the last.
    mutating func streamClosed(_ name: String, generation: UInt64, error: String?) -> [Waiter] {
        guard var feed = feeds[name], feed.generation == generation else { return isQuiet ? takeQuietWaiters() : [] }
        if let error { feed.error = error }
        feed.stream = .closed
        feeds[name] = feed
        return isQuiet ? takeQuietWaiters() : []
    }

    // MARK: Pausing

    /// Previews pause: the streams open now are to be stopped; the caller then waits for quiet.
    mutating func pause() -> [(client: Client, streamID: String)] {
        pauses += 1
        return feeds.values.compactMap { feed in
            if case .open(let client, let streamID) = feed.stream { (client, streamID) } else { nil }
        }
    }

    /// A `pause()` caller waits for every stream to close; false when they already are.
    mutating func waitForQuiet(id: UInt64, waiter: Waiter) -> Bool {
        guard !isQuiet else { return false }
        quietWaiters[id] = waiter
        return true
    }

    /// A `pause()` caller gave up waiting (its deadline passed).
    mutating func cancelQuietWait(id: UInt64) -> Waiter? {
        quietWaiters.removeValue(forKey: id)
    }

    /// Previews resume (when every pause has): the feeds' loops waiting to open are resumed.
    mutating func resume() -> [Waiter] {
        pauses = max(0, pauses - 1)
        guard pauses == 0 else { return [] }
        var loops: [Waiter] = []
        for (name, feed) in feeds {
            if case .waiting(let loop) = feed.stream {
                loops.append(loop)
                feeds[name]?.stream = .closed
            }
        }
        return loops
    }

    private mutating func takeQuietWaiters() -> [Waiter] {
        defer { quietWaiters.removeAll() }
        return Array(quietWaiters.values)
    }

    // MARK: Keep-alive

    enum KeepAliveAction {
        /// Give these watchers the newest preview again (nothing newer came for `interval`).
        case resend([(watchers: [Watcher], preview: Preview)])
        /// Sleep until then and ask again.
        case sleep(until: ContinuousClock.Instant)
        /// Nothing to keep alive: `parkKeepAlive` until the next preview.
        case wait
        case end
    }

    /// What the keep-alive does at `now`: each feed whose watchers were given nothing for `interval` gets
    /// its newest preview again, so that a watcher that left is noticed by its next write failing.
    mutating func keepAlive(now: ContinuousClock.Instant, interval: Duration) -> KeepAliveAction {
        guard !stopped else { return .end }
        var resend: [(watchers: [Watcher], preview: Preview)] = []
        var next: ContinuousClock.Instant?
        for (name, feed) in feeds {
            guard let latest = feed.latest, let delivered = feed.deliveredAt, !feed.watchers.isEmpty else { continue }
            var due = delivered + interval
            if due <= now {
                resend.append((Array(feed.watchers.values), latest))
                feeds[name]?.deliveredAt = now
                due = now + interval
            }
            next = min(next ?? due, due)
        }
        if !resend.isEmpty { return .resend(resend) }
        if let next { return .sleep(until: next) }
        return .wait
    }

    /// The keep-alive waits for a preview; false (resume it at once) when one is there already.
    mutating func parkKeepAlive(_ waiter: Waiter) -> Bool {
        guard !stopped, !feeds.values.contains(where: { $0.latest != nil && !$0.watchers.isEmpty }) else { return false }
        keepAliveWaiter = waiter
        return true
    }

    /// The keep-alive's wait ended by cancellation.
    mutating func cancelKeepAliveWait() -> Waiter? {
        defer { keepAliveWaiter = nil }
        return keepAliveWaiter
    }

    // MARK: Stopping

    struct StopAllAction {
        var finish: [Watcher] = []
        var cancel: [Task<Void, Never>] = []
        var resume: [Waiter] = []
    }

    /// Every feed ends (service shutdown).
    mutating func stopAll() -> StopAllAction {
        stopped = true
        var action = StopAllAction()
        for feed in feeds.values {
            action.finish += feed.watchers.values
            if let task = feed.task { action.cancel.append(task) }
            if case .waiting(let loop) = feed.stream { action.resume.append(loop) }
        }
        feeds.removeAll()
        action.resume += takeQuietWaiters()
        if let keepAlive = keepAliveWaiter { action.resume.append(keepAlive) }
        keepAliveWaiter = nil
        return action
    }
}
