/// The embedded default config: the same text as `Config/uploadq.toml` (a test keeps the two equal).
package enum DefaultConfiguration {
    /// The TOML text.
    package static let text = #"""
# uploadq default configuration: files dropped into spool/ are copied to uploaded/.
# Relative paths resolve against this file's directory. This text is also built into the
# binary: with no config file anywhere, the daemon runs on it relative to the working directory.

state_dir = ".uploadq"

[spool]
dir = "spool"
destination = "default"          # destination for files without a sidecar
quiet_period = "1s"              # a file must be closed and unchanged this long before it is taken
rescan_interval = "30s"          # full rescan on a timer, in case an event was missed

[limits]
concurrency = 4                  # transfers at once, all destinations
min_free_space = "256MiB"        # below it the spool waits and copies are refused; or "5%"; 0 = off

[retry]                          # every 30 s for 10 failures, then every 5 min, forever
initial_interval = "30s"
initial_attempts = 10
later_interval = "5m"
jitter = 0.1

[link]
mode = "auto"

[bandwidth]                      # bytes per second shared by all transfers, 0 = unlimited
metered = 0
unmetered = 0

[destinations.default]
protocol = "file"
url = "file://uploaded"
name_template = "{job_id}-{name}"

"""#
}
