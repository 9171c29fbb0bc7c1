// Tells rustc where libdlpackshim.so is: the directory in DLPACKSHIM_LIB_DIR
// (run.sh points it at the freshly built csrc/.libs), else the linker's
// default search path (an installed library). No crates: plain cargo
// directives on stdout.
fn main() {
    println!("cargo:rerun-if-env-changed=DLPACKSHIM_LIB_DIR");
    if let Ok(dir) = std::env::var("DLPACKSHIM_LIB_DIR") {
        if !dir.is_empty() {
            println!("cargo:rustc-link-search=native={}", dir);
        }
    }
    println!("cargo:rustc-link-lib=dylib=dlpackshim");
}
