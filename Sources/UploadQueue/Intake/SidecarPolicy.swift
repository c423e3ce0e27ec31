/// What a spool sidecar may choose: the config is the authority, and a sidecar may narrow it, never widen it.
///
/// Whoever can write into the spool writes its sidecars, while the daemon holds the destinations' and the
/// patches' credentials. So a sidecar picks only among the destinations `[spool] sidecar_destinations` lists (by
/// default the spool's own alone), sets only the `meta` keys `sidecar_meta_keys` lists, gives its file a priority
/// of at most `sidecar_max_priority`, makes `on_metered` stricter only (unless `sidecar_may_allow_metered`), and
/// names a patch target only within what `PatchAuthority` allows (no body, no query, listed headers).
struct SidecarPolicy: Sendable, Equatable {
    let spool: Configuration.Spool
    let destinations: [String: Destination]
    let patch: PatchSettings
    /// The highest priority a sidecar may give its file.
    let priorityCap: Int

    init(configuration: Configuration, spool: Configuration.Spool) {
        self.spool = spool
        destinations = configuration.destinations
        patch = configuration.patch
        priorityCap = Self.priorityCap(spool: spool, urgentPriority: configuration.schedule.urgentPriority)
    }

    /// `sidecar_max_priority`, else 0: a sidecar may lower its files' priority, not raise them past the others'.
    /// Below `urgent_priority` either way, unless the admin set the cap itself: urgent files skip the windows.
    static func priorityCap(spool: Configuration.Spool, urgentPriority: Int?) -> Int {
        if let cap = spool.sidecarMaxPriority { return cap }
        return min(0, (urgentPriority ?? Int.max) - 1)
    }

    /// Why `sidecar` may not be used, said of the sidecar ("names destination …"), or nil when it may.
    func refusal(of sidecar: Sidecar) -> String? {
        let destination = sidecar.destination ?? spool.destination
        let allowed = spool.destinationsForSidecars
        if let chosen = sidecar.destination, !allowed.contains(chosen) {
            let listed = allowed.sorted().map { "\"\($0)\"" }.joined(separator: ", ")
            let which = spool.sidecarDestinations == nil ? "by default only the spool's own" : "[spool] sidecar_destinations"
            return """
                names destination "\(chosen)"; a sidecar may name \(listed.isEmpty ? "none" : listed) (\(which); the \
                admin lists more in sidecar_destinations)
                """
        }
        if let key = sidecar.meta.keys.sorted().first(where: { !spool.sidecarMetaKeys.contains($0) }) {
            let listed = spool.sidecarMetaKeys.sorted().map { "\"\($0)\"" }.joined(separator: ", ")
            return """
                sets meta "\(SafeText.escaped(key))", which [spool] sidecar_meta_keys does not list (\
                \(listed.isEmpty ? "it lists none" : listed))
                """
        }
        if let priority = sidecar.priority, priority > priorityCap {
            let source = spool.sidecarMaxPriority == nil ? "the default cap" : "[spool] sidecar_max_priority"
            return "sets priority \(priority), above \(priorityCap) (\(source)); the admin may raise sidecar_max_priority"
        }
        // A local directory takes no link: its policy is moot.
        if let text = sidecar.onMetered, let chosen = MeteredPolicy(text), !spool.sidecarMayAllowMetered,
           let configured = destinations[destination], configured.isNetwork,
           chosen.isLooser(than: configured.onMetered) {
            return """
                sets on_metered "\(text)", looser than destination "\(destination)"'s "\(configured.onMetered)"; a sidecar \
                may only make it stricter, unless [spool] sidecar_may_allow_metered = true
                """
        }
        if let lane = sidecar.lane, !spool.sidecarLanes.contains(where: { lane.hasPrefix($0) }) {
            let listed = spool.sidecarLanes.map { "\"\($0)\"" }.joined(separator: ", ")
            return """
                names lane "\(SafeText.escaped(lane))", which no prefix of [spool] sidecar_lanes allows (\
                \(listed.isEmpty ? "it lists none" : listed))
                """
        }
        if let group = sidecar.group, !spool.sidecarGroups.contains(where: { group.hasPrefix($0) }) {
            let listed = spool.sidecarGroups.map { "\"\($0)\"" }.joined(separator: ", ")
            return """
                names group "\(SafeText.escaped(group))", which no prefix of [spool] sidecar_groups allows (\
                \(listed.isEmpty ? "it lists none" : listed))
                """
        }
        if let target = sidecar.patch, let why = PatchAuthority.sidecarRefusal(target, settings: patch) {
            return why
        }
        return nil
    }
}
