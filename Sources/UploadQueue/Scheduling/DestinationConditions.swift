import Foundation

/// What stands between one destination's jobs and a transfer now, as the scheduler sees it: its link, its
/// circuit and quota, and the device's constraints (power, windows, the metered budget).
///
/// The claim's door (`ClaimGate`) and the holds `list` and `show` explain (`QueueHolds`) are both made from it, so
/// what lets a job go and what says why it waits never disagree.
struct DestinationConditions: Sendable, Equatable {
    /// The link's class; nil for a local directory (no link) or a link not looked at yet (counts as unmetered).
    var linkClass: LinkStatus.LinkClass?
    /// The destination's `on_metered` policy.
    var onMetered: MeteredPolicy = .defer
    var circuitOpen = false
    var quotaFull = false
    /// What answered for the destination proved nothing (a captive portal, a proxy), in words; nil when not held.
    var unverifiedAnswer: String?
    /// The power requirement not met now, in words; nil when met.
    var power: String?
    /// Outside every upload window: when the next one opens (nil: not within a week) and the priority that
    /// ignores windows (nil: none does).
    var outsideWindow: OutsideWindow?
    /// The metered budget is spent (only while the link is metered), or, for a destination that sends whole files,
    /// too little of it is left for files larger than `BudgetSpent.sizeAbove`.
    var budgetSpent: BudgetSpent?

    struct OutsideWindow: Sendable, Hashable {
        var opensAt: Date?
        var urgentPriority: Int?
    }

    struct BudgetSpent: Sendable, Hashable {
        /// `200 MiB/day`.
        var budget: String
        var resetsAt: Date
        /// nil: spent. Otherwise what is left: files larger than this wait (whole-file destinations only).
        var sizeAbove: Int64? = nil
    }

    /// Whether no job of the destination may start, whatever it is (offline or behind a portal, the power, an open
    /// circuit, a full storage, an unverified answer, or outside its windows with no urgent priority).
    var isShut: Bool {
        linkClass == .offline || linkClass == .portal || power != nil || circuitOpen || quotaFull
            || unverifiedAnswer != nil
            || (outsideWindow != nil && outsideWindow?.urgentPriority == nil)
    }
}
