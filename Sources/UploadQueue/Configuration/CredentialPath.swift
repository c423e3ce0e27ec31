extension Destination {
    /// A secret's file named in systemd's credentials directory: `%d/NAME`, as in a unit file.
    ///
    /// `LoadCredential=api-token:/etc/uploadq/api-token` in the unit makes systemd copy the file, readable by the
    /// service alone, to `$CREDENTIALS_DIRECTORY/api-token`; `token_file = "%d/api-token"` reads it from there. Unlike
    /// `Environment=`, which any local user reads with `systemctl show`, the secret never leaves its files.
    public enum CredentialPath {
        /// What a path in the credentials directory starts with.
        public static let prefix = "%d/"

        /// Whether `path` names a credential (`%d/NAME`).
        public static func isCredential(_ path: String) -> Bool { path.hasPrefix(prefix) }

        /// Why `path`, a credential's, is not a usable one (a name with a slash, `.` or `..`), or nil.
        public static func problem(_ path: String) -> String? {
            let name = path.dropFirst(prefix.count)
            guard !name.isEmpty, !name.contains("/"), name != ".", name != ".." else {
                return "\"\(path)\": after %d/ comes a credential's name, as LoadCredential= gives it (no slash)"
            }
            return nil
        }

        /// The file `path` names now: a credential's under `$CREDENTIALS_DIRECTORY`, anything else as it is. Nil for a
        /// credential when the variable is not set (the daemon does not run under a unit with `LoadCredential=`).
        public static func resolve(_ path: String, environment: [String: String]) -> String? {
            guard isCredential(path) else { return path }
            guard let directory = environment["CREDENTIALS_DIRECTORY"], !directory.isEmpty else { return nil }
            return directory + "/" + path.dropFirst(prefix.count)
        }

        /// What to say when a credential cannot be found: where it comes from, and how to provide it.
        public static func missing(_ path: String) -> String {
            """
            \(path) names systemd's credentials directory, and CREDENTIALS_DIRECTORY is not set: run the daemon as the \
            unit with LoadCredential=\(path.dropFirst(prefix.count)):/etc/uploadq/\(path.dropFirst(prefix.count)) \
            (or name the file itself)
            """
        }
    }
}
