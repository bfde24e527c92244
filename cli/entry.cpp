// oomb's main: the CLI is run_main (cli/main.cpp), shared with the in-process fuzz targets.
#include "cli/command.h"

int main(int argc, char** argv) { return oomb::cli::run_main(argc, argv); }
