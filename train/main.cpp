// The `fathom` command line.
#include <iostream>

int main(int argc, char** argv) {
  std::cerr << "fathom: commands are being assembled\n";
  return 1;
}
