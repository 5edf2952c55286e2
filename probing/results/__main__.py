"""`python -m probing.results`: write the JSON Schema of every kind of results.json into probing/results/schemas/."""

from probing.results.schema import write_schemas

for path in write_schemas():
    print(path)
