import Foundation

/// An access key, its secret and an optional session token; printed, it shows only the access key's first
/// characters.
struct S3Credentials: Sendable, Equatable, CustomStringConvertible {
    var accessKey: String
    var secretKey: String
    var sessionToken: String?

    var description: String { "S3Credentials(\(accessKey.prefix(4))…)" }

    /// Reads the credentials `source` names for destination `destination`; the error says where they were looked
    /// for, never what was found.
    static func load(_ source: S3CredentialSource, destination: String,
                     environment: [String: String] = ProcessInfo.processInfo.environment)
        throws(TransferFailure) -> S3Credentials
    {
        switch source {
        case .environment(let accessVariable, let secretVariable, let tokenVariable):
            guard let access = nonEmpty(environment[accessVariable]), let secret = nonEmpty(environment[secretVariable])
            else {
                throw missing(destination, "the environment variables \(accessVariable) and \(secretVariable) are "
                    + "not both set for the daemon")
            }
            return S3Credentials(accessKey: access, secretKey: secret,
                                 sessionToken: tokenVariable.flatMap { nonEmpty(environment[$0]) })
        case .sharedFile(let named, let profile):
            guard let path = CredentialPath.resolve(named, environment: environment) else {
                throw missing(destination, "credentials_file " + CredentialPath.missing(named))
            }
            return try fromSharedFile(path, profile: profile, destination: destination)
        case .standard(let profile):
            if let access = nonEmpty(environment["AWS_ACCESS_KEY_ID"]),
               let secret = nonEmpty(environment["AWS_SECRET_ACCESS_KEY"]) {
                return S3Credentials(accessKey: access, secretKey: secret,
                                     sessionToken: nonEmpty(environment["AWS_SESSION_TOKEN"]))
            }
            let path = nonEmpty(environment["AWS_SHARED_CREDENTIALS_FILE"])
                ?? (nonEmpty(environment["HOME"]) ?? NSHomeDirectory()) + "/.aws/credentials"
            let chosen = profile ?? nonEmpty(environment["AWS_PROFILE"]) ?? "default"
            guard FileManager.default.fileExists(atPath: path) else {
                throw missing(destination, "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY are not set and there is no "
                    + "shared credentials file at \(path); set access_key_env and secret_key_env, or "
                    + "credentials_file")
            }
            return try fromSharedFile(path, profile: chosen, destination: destination)
        }
    }

    /// One profile of an INI-style AWS credentials file.
    static func fromSharedFile(_ path: String, profile: String, destination: String) throws(TransferFailure)
        -> S3Credentials
    {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw missing(destination, "cannot read the credentials file \(path)")
        }
        var section: String?
        var values: [String: String] = [:]
        for rawLine in text.split(whereSeparator: \.isNewline) {
            let line = rawLine.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
            if line.hasPrefix("["), line.hasSuffix("]") {
                var name = line.dropFirst().dropLast().trimmingCharacters(in: .whitespaces)
                if name.hasPrefix("profile ") { name = String(name.dropFirst("profile ".count)) }
                section = name.trimmingCharacters(in: .whitespaces)
                continue
            }
            guard section == profile, let equals = line.firstIndex(of: "=") else { continue }
            let key = line[..<equals].trimmingCharacters(in: .whitespaces).lowercased()
            values[key] = line[line.index(after: equals)...].trimmingCharacters(in: .whitespaces)
        }
        guard let access = nonEmpty(values["aws_access_key_id"]), let secret = nonEmpty(values["aws_secret_access_key"])
        else {
            throw missing(destination, "the profile [\(profile)] of \(path) has no aws_access_key_id and "
                + "aws_secret_access_key")
        }
        return S3Credentials(accessKey: access, secretKey: secret, sessionToken: nonEmpty(values["aws_session_token"]))
    }

    private static func nonEmpty(_ value: String?) -> String? {
        guard let value, !value.isEmpty else { return nil }
        return value
    }

    private static func missing(_ destination: String, _ detail: String) -> TransferFailure {
        .permanent("credentials", "no S3 credentials for destination \"\(destination)\": \(detail); then "
            + "`uploadq retry`")
    }
}
