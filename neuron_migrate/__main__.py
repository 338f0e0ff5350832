from neuron_migrate.start import main

main()
