//! Links the unwinder (libgcc_eh) into the scrun executable on GNU/Linux,
//! so that scrun needs no libgcc_s at run time.
//!
//! scrun starts once per job and its start-up is part of every launch's
//! latency: loading libgcc_s (a file to open and map, its symbols in every
//! lookup, its constructor's CPU detection by `cpuid`, which on a virtual
//! machine exits to the hypervisor) costs more than the rest of the
//! dynamic loader's work for scrun. Rust links libgcc_s unless the whole
//! program is static, and a static scrun could not load libpmix with
//! dlopen. The archive is linked whole, so that its definitions, not
//! libgcc_s's, satisfy the standard library's references, and the linker
//! (`--as-needed`) leaves libgcc_s out.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let static_crt = var("CARGO_CFG_TARGET_FEATURE")
        .split(',')
        .any(|feature| feature == "crt-static");
    if var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu" && !static_crt
    {
        println!(
            "cargo::rustc-link-arg-bin=scrun=-Wl,--push-state,--whole-archive,-l:libgcc_eh.a,--pop-state"
        );
    }
}
