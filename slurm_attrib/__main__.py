from slurm_attrib.cli import main

main()
