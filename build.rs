//! Release binaries keep their line tables (backtraces name file and
//! line) with the debug sections compressed by the linker: uncompressed,
//! the Rust standard library's debug info made each binary about 60 MB.
//! Debug builds (the tests) link as before.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("PROFILE").as_deref() == Ok("release") {
        println!("cargo:rustc-link-arg-bins=-Wl,--compress-debug-sections=zlib");
    }
}
