"""Packaging shim: the rule catalogue is kept at the top level (rules/) and ships as `neuron_migrate.catalogue_data`."""

from setuptools import find_packages, setup

setup(packages=find_packages(include=["neuron_migrate", "neuron_migrate.*"]) + ["neuron_migrate.catalogue_data"])
