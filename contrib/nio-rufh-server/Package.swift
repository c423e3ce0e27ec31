// swift-tools-version: 6.0
// A test-only server for IETF Resumable Uploads for HTTP (interop version 6, also 3 and 5) built on
// swift-nio-extras' NIOResumableUpload, so uploadq's RUFH client can be checked against an independent
// implementation. Not part of the uploadq package; build it on its own:
//   swift build && .build/debug/nio-rufh-server PORT STORE_DIR
import PackageDescription

let package = Package(
    name: "nio-rufh-server",
    platforms: [.macOS(.v13)],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
    ],
    targets: [
        .executableTarget(
            name: "nio-rufh-server",
            dependencies: [
                .product(name: "NIOResumableUpload", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ]
        )
    ]
)
