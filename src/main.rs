fn main() {
    std::process::exit(vikingfs::cli::main());
}
