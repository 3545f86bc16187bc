fn main() {
    std::process::exit(mirrorfs::cli::run(std::env::args_os().collect()));
}
