/// The version of uploadq, sent as the `User-Agent` of every request.
public enum UploadQueueVersion {
    public static let current = "0.3.0"
}
