from neuron_migrate.cli import main

main()
