import Foundation

/// An object's key and headers for a job: `key_template` filled, `Content-Type`, and the job's meta as
/// `x-amz-meta-*`.
enum S3ObjectHeaders {
    /// The object key for a job: `key_template` filled, each value kept to one segment (`/` and `\` become `_`,
    /// as does a leading `.` and any control character), empty segments dropped.
    /// A key longer than S3's 1,024 bytes has its last segment shortened by the name rule (`FileName`); one
    /// whose folders alone leave no room fails for good.
    static func key(for job: Job, template: PathTemplate) throws(TransferFailure) -> String {
        let expanded = template.expand(jobID: job.id, originalName: job.originalName, sha256: job.sha256,
                                       meta: job.meta, date: job.createdAt, escape: keySegment)
        // Empty segments go; a segment made only of dots would be dropped by URL normalisation: it becomes `_`.
        let key = PathSegments.split(expanded, omittingEmpty: true).map { $0.allSatisfy { $0 == "." } ? "_" : $0 }
            .joined(separator: "/")
        if key.isEmpty {
            throw .permanent("key", "key_template \"\(template)\" gives an empty object key for this job (its "
                + "placeholders are empty); use one that always has text, such as {job_id}")
        }
        guard let fitted = FileName.fittingKey(key, jobID: job.id) else {
            throw .permanent("name-too-long", """
                key_template "\(template)" gives a key of \(key.utf8.count) bytes whose folders leave no room for the \
                name; S3 takes at most \(FileName.objectKeyLimit): use shorter values or a shorter template, then \
                `uploadq retry \(job.id)`
                """)
        }
        return fitted
    }

    /// One value as part of a key: readable (spaces and Unicode kept; the wire encoding is SigV4's business) but
    /// unable to add a segment or start a hidden or relative one.
    static func keySegment(_ value: String) -> String {
        var scalars = String.UnicodeScalarView()
        for scalar in value.unicodeScalars {
            let unsafe = scalar == "/" || scalar == "\\" || scalar.value < 0x20 || scalar.value == 0x7F
            scalars.append(unsafe ? "_" : scalar)
        }
        var text = String(scalars)
        if text.hasPrefix(".") { text = "_" + text.dropFirst() }
        return text
    }

    /// `Content-Type` and the job's meta as `x-amz-meta-*` (values outside printable ASCII RFC 2047-encoded, keys
    /// that cannot be header names left out).
    static func headers(for job: Job) -> [HTTPHeader] {
        var headers = [HTTPHeader("Content-Type", job.contentType)]
        for key in job.meta.keys.sorted() where isHeaderToken(key) && !(job.meta[key] ?? "").isEmpty {
            let value = job.meta[key] ?? ""
            let plain = value.unicodeScalars.allSatisfy { $0.value >= 0x20 && $0.value < 0x7F }
                && !value.hasPrefix(" ") && !value.hasSuffix(" ")
            // `_` in a header name is dropped by nginx-fronted stores: it travels as `-`.
            headers.append(HTTPHeader("x-amz-meta-\(key.lowercased().replacingOccurrences(of: "_", with: "-"))",
                                      plain ? value : "=?UTF-8?B?\(Data(value.utf8).base64EncodedString())?="))
        }
        return headers
    }

    static func isHeaderToken(_ text: String) -> Bool {
        !text.isEmpty && text.unicodeScalars.allSatisfy {
            $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "-_.".unicodeScalars.contains($0))
        }
    }
}
