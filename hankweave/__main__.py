from hankweave.cli import console_main

console_main()
