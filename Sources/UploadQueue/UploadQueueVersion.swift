/// The version of uploadq, sent as the `User-Agent` of every request.
public enum UploadQueueVersion {
    /// The version string, e.g. `0.3.0`.
    public static let current = "0.3.0"
}
