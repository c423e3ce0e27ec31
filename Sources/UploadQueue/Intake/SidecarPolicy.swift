/// What a spool sidecar may choose: the config is the authority, and a sidecar may narrow it, never widen it.
///
/// Whoever can write into the spool writes its sidecars, while the daemon holds the destinations' and the
/// patches' credentials. So a sidecar picks only among the destinations `[spool] sidecar_destinations` lists,
/// makes `on_metered` stricter only (unless `[spool] sidecar_may_allow_metered`), and names a patch target only
/// within what `PatchAuthority` allows.
struct SidecarPolicy: Sendable {
    let spool: Configuration.Spool
    let destinations: [String: Destination]
    let patch: PatchSettings

    init(configuration: Configuration, spool: Configuration.Spool) {
        self.spool = spool
        destinations = configuration.destinations
        patch = configuration.patch
    }

    /// Why `sidecar` may not be used, said of the sidecar ("names destination …"), or nil when it may.
    func refusal(of sidecar: Sidecar) -> String? {
        let destination = sidecar.destination ?? spool.destination
        if let chosen = sidecar.destination, let allowed = spool.sidecarDestinations, !allowed.contains(chosen) {
            let listed = allowed.sorted().map { "\"\($0)\"" }.joined(separator: ", ")
            return """
                names destination "\(chosen)", which [spool] sidecar_destinations does not list (\
                \(listed.isEmpty ? "it lists none" : listed))
                """
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
        if let target = sidecar.patch, let why = PatchAuthority.sidecarRefusal(target, settings: patch) {
            return why
        }
        return nil
    }
}
