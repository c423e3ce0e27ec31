// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "uploadq",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "UploadQueue", targets: ["UploadQueue"]),
        .executable(name: "uploadq", targets: ["uploadq"]),
    ],
    dependencies: [
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        // Structured fields (RFC 9651) of the IETF resumable-upload headers; no dependencies of its own.
        .package(url: "https://github.com/apple/swift-http-structured-headers", from: "1.7.0"),
        // The control API's HTTP/1.1 server on a Unix socket (NIOPosix and the llhttp-based NIOHTTP1 codec only).
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.3"),
    ],
    targets: [
        // libmagic: the content type of each accepted file.
        .systemLibrary(name: "CMagic", providers: [.apt(["libmagic-dev"])]),
        // libcurl through pkg-config, and the typed wrappers Swift needs for its variadic calls.
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .target(name: "CCurlShim", dependencies: ["CCurl"]),
        // Linux calls Swift cannot reach directly (renameat2, inotify records) and SHA-256 from libcrypto.
        .target(
            name: "CUploadQueueSystem",
            linkerSettings: [.linkedLibrary("crypto")]
        ),
        .target(
            name: "UploadQueue",
            dependencies: [
                "CCurlShim",
                "CMagic",
                "CUploadQueueSystem",
                .product(name: "GRDB", package: "GRDB.swift"),
                // SQLite's own API: the claim and the end of every transfer read a job straight from its statement.
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "RawStructuredFieldValues", package: "swift-http-structured-headers"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        .executableTarget(
            name: "uploadq",
            dependencies: [
                "UploadQueue",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .testTarget(
            name: "UploadQueueTests",
            dependencies: [
                "UploadQueue",
                .product(name: "GRDB", package: "GRDB.swift"),
                // sqlite3_trace_v2 and sqlite3_stmt_status: the tests count the rows a scheduler round reads.
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
