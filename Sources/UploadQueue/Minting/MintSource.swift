import Foundation

extension Destination {
    /// Where a minted destination gets each file's upload target: the app's backend, which hands out short-lived upload
    /// URLs (S3 presigned PUT or POST, Supabase signed upload URLs, GCS signed URLs) instead of giving the device
    /// long-lived keys.
    public enum MintSource: Sendable, Equatable {
        /// `mint_url`: POSTed the job as JSON; its credentials are `[mint]`'s.
        case url(String)
        /// `mint_command`: run directly (no shell) with the job as JSON on its standard input; prints the target as
        /// JSON. It sees `PATH`, `HOME`, `LANG` and the variables in `passEnvironment`, no others.
        case command([String], timeout: Duration, passEnvironment: [String] = [])
    }
}

extension Destination {
    /// `[mint]`: how uploadq reaches the app's minting backend (`mint_url`): its headers, bearer token and CAs.
    public struct MintSettings: Sendable, Equatable {
        /// Headers, credentials, TLS and timeouts of the requests to the backend (never of the uploads themselves).
        public var http: HTTPSettings

        /// No credentials by default.
        public init(http: HTTPSettings = HTTPSettings()) {
            self.http = http
        }
    }
}
