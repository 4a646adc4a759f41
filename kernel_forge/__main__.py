from kernel_forge.entry import main

main()
